//! The catalog of `.env` keys (stub, replaced by the config work).
