"""Request parsing every API surface shares: typed field access, sampling fields, guided decoding, tool pairing."""
