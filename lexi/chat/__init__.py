"""Chat: templates, reasoning separation, the tool pipeline, and the constraint plans a turn asks for."""
