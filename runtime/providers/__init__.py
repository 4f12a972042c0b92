"""Provider adapters: provider SSE in, Gemini-compatible chunks plus preparations out."""
