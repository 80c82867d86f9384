"""Chat: templates, reasoning separation, tool calls and constraints."""
