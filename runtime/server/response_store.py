"""The Responses API's stored responses, for `previous_response_id` and GET /v1/responses/{id}: held in memory for
the server's life, the oldest forgotten past a bound (nothing is written to disk).

    store.put(response_id, response_object, conversation)   # conversation: the template's messages, reply included
    store.get(response_id) -> (response_object, conversation) or None
"""

from __future__ import annotations

import threading
from collections import OrderedDict

MAX_RESPONSES = 1024


class ResponseStore:
    def __init__(self, max_responses: int = MAX_RESPONSES):
        self._max = max_responses
        self._items: OrderedDict[str, tuple[dict, list[dict]]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, response_id: str, response: dict, conversation: list[dict]) -> None:
        with self._lock:
            self._items[response_id] = (response, conversation)
            self._items.move_to_end(response_id)
            while len(self._items) > self._max:
                self._items.popitem(last=False)

    def get(self, response_id: str) -> tuple[dict, list[dict]] | None:
        with self._lock:
            return self._items.get(response_id)

    def delete(self, response_id: str) -> bool:
        with self._lock:
            return self._items.pop(response_id, None) is not None
