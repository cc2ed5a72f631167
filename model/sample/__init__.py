"""Sampling: ``SamplingParams``, the sampler, greedy argmax and the rejection sampler of speculative decoding.

    sampling.py           SamplingParams and sample()
    greedy_argmax.py      torch.argmax's answer in two cheap passes over a large vocabulary
    rejection_sampler.py  accept or reject drafts against the target's distribution
"""
