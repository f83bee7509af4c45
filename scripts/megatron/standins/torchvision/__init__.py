"""Stand-in for torchvision, put on PYTHONPATH by scripts/megatron-tests.sh only where the
real package cannot be imported (the package index here has torchvision's CUDA builds
only, which need a CUDA torch).

Megatron-LM's ``tools/preprocess_mmdata.py`` imports ``torchvision.transforms.ToTensor``
and never uses it; this package provides that one name (``transforms.ToTensor``) and
nothing else. It has no distribution metadata, so libraries that look torchvision up by
its metadata (transformers) still see it as absent.
"""
