"""``megatron.core.datasets``, served by tokenloom: one module per megatron-core module.

Each module here carries megatron-core 0.16.1's public names with Megatron's
signatures (``tests/megatron/test_api.py`` compares them with the installed
megatron-core). After :func:`tokenloom.megatron.install` they are importable under
megatron's names too (``megatron.core.datasets.gpt_dataset`` *is*
``tokenloom.megatron.datasets.gpt_dataset``).
"""
