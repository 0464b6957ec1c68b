"""The objects that exist once the servers are connected leave the collector's full passes (heap.py)."""

import gc
import weakref

from lookahead_reasoning.runtime.servers.heap import freeze_startup_objects


def test_the_startup_objects_are_frozen_once_per_process():
    freeze_startup_objects()
    frozen = gc.get_freeze_count()
    assert frozen > 1000  # the imports' objects: a full collection does not walk them

    class Node:
        pass

    cycle = Node()
    cycle.itself = cycle  # garbage only a full collection can free
    freed = weakref.ref(cycle)
    freeze_startup_objects()
    assert gc.get_freeze_count() == frozen  # once per process: the cycle was not frozen
    del cycle
    gc.collect()
    assert freed() is None  # what is allocated afterwards stays collectable
