"""Models: transformer encoder, heads, and whole classifier/pretrainer modules."""

from sptune.training.models.encoder import Encoder, EncoderConfig
from sptune.training.models.model import Classifier, ModelConfig, Pretrainer, encoder_state

__all__ = ["Classifier", "Encoder", "EncoderConfig", "ModelConfig", "Pretrainer", "encoder_state"]
