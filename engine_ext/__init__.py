"""vLLM extension: build a speculative-decoding engine whose drafter runs under CUDA
graphs, check at start-up that it will, and count inside the worker what really ran."""
