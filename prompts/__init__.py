"""Default prompt templates (``*.txt``), read by ``benchfill.prompts``.

A package only so that ``importlib.resources.files("prompts")`` finds the files
in an installed copy. Override any of them by putting a file of the same name
in a directory given as ``user_dir`` or ``$BENCHFILL_PROMPTS_DIR``.
"""
