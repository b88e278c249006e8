"""Recording files: format, streaming writer, reader and structural checks (numpy only)."""

from simuguard_gym.recording.format import (
    CorruptRecordingError,
    NotARecordingError,
    RecordingError,
    TruncatedRecordingError,
    UnsupportedSchemaError,
)
from simuguard_gym.recording.reader import Recording, load_recording

__all__ = ["CorruptRecordingError", "NotARecordingError", "Recording", "RecordingError", "TruncatedRecordingError",
           "UnsupportedSchemaError", "load_recording"]
