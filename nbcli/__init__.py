"""nb: a toolkit for studying and exploiting how Transformers handle word frequency."""

__version__ = "0.1.0"
