"""The generation layer every generating route shares: one turn per request, sampling, the engine stream."""
