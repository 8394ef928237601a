"""The engine: paged KV bookkeeping with prefix caching (block_manager.py); the request state, the scheduling
policy and the engine loop join it.

    from localllm.engine import BlockManager
"""

from __future__ import annotations

from .block_manager import BlockManager, BlockTable

__all__ = ["BlockManager", "BlockTable"]
