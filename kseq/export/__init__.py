"""SavedModel export: strings in, strings out, search in the graph.

Every servable needs only TensorFlow (and tensorflow_text's ops) at serving
time: no kseq, no keras, no Python functions, so TF Serving can load it.
`publishing` writes versions atomically; one module a kind of servable.
"""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)

from kseq.export.captioner import IMAGE_SPEC, caption_function, export_captioner
from kseq.export.classifier import TEXT_SPEC, classify_function, export_classifier
from kseq.export.ctranslate2_model import export_ctranslate2
from kseq.export.conditioned_generator import (
    CLASS_ID_SPEC, LABEL_SPEC, export_conditioned_generator, generate_from_condition_function,
    generate_from_label_function, label_lookup,
)
from kseq.export.language_model import PROMPT_SPEC, continue_function, export_language_model
from kseq.export.publishing import latest_version, next_version, write_servable
from kseq.export.requests import id_matrix
from kseq.export.translator import SOURCE_SPEC, export_translator, translate_function

__all__ = [
    "IMAGE_SPEC", "caption_function", "export_captioner",
    "CLASS_ID_SPEC", "LABEL_SPEC", "PROMPT_SPEC", "SOURCE_SPEC", "TEXT_SPEC", "classify_function",
    "continue_function", "export_classifier", "export_ctranslate2", "export_conditioned_generator",
    "export_language_model",
    "export_translator", "generate_from_condition_function", "generate_from_label_function", "id_matrix",
    "label_lookup", "latest_version", "next_version", "translate_function", "write_servable",
]
