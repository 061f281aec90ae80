//! Strict `.env` parsing (stub, replaced by the config work).
