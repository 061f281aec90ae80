//! Tests of the delivery worker.
