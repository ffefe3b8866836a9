"""Reserved token ids shared by every tokenizer, model and search in kseq."""

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
NUM_SPECIAL_IDS = 4
