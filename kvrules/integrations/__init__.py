"""Integrations of kvrules with inference engines.

Each engine has its own module (``kvrules.integrations.vllm``); importing this package, or
kvrules itself, never imports an engine. An engine is imported only when a function that
needs its classes is called.
"""
