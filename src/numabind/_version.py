"""numabind's version, in one place: the package face, the compiled core's check and ``--version`` read it here."""

__version__ = "0.1.0"
