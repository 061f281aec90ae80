//! Writing the private JSON config (stub, replaced by the config work).
