//! Tests of the netfilter attribution.
