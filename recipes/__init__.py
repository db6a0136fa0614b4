"""The shipped YAML recipes, installed as package data of `proxycomp.recipes` (read with importlib.resources)."""
