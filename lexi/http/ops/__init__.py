"""Operations: auth, CORS, drain, metrics, logs, model names, server config, heap trimming, health and model info."""
