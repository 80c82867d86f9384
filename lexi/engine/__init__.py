"""The engine: KV blocks, scheduler, sampler, runner and the async API that serves requests."""
