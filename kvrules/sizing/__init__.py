"""kvrules fit: parameter counts, weights per GPU, the GPU catalog and the runtime-memory
estimate (see docs/fit.md)."""
