"""The worker: runs scheduled steps of the network on one device.

    model_runner.py   ModelRunner.execute(scheduler_output): batch, lay out, forward, sample
    input_batch.py    InputBatch: the persistent per-request rows
    kv_cache.py       the page pool (KV pages and GDN states) and its memory plan
    gdn_pages.py      where each GDN layer's states sit in the pool's pages each step
    device_memory.py  the device and its memory budget
"""
