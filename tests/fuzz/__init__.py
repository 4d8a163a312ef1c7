"""kvrules' own fuzz suite: generators, the invariant checker and the runners shared by the
pytest modules here and the long campaign ``benchmarks/fuzz.py``.

Import path: ``tests/`` is on ``sys.path`` (``tests/conftest.py``; the campaign adds it), so the
package is ``fuzz``.
"""
