"""How the worker spells torch values in its JSON: dtype names and dimensions. Imports
nothing of the worker's, so every module may use it."""


def dtype_name(dt):
    return str(dt).replace("torch.", "")


def dim_text(d):
    return int(d) if isinstance(d, int) else str(d)
