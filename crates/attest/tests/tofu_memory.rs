//! The trust-on-first-use contract for `InMemoryTofuStore`.

mod common {
    pub mod tofu_contract;
}

use nodeauth_attest::InMemoryTofuStore;

#[test]
fn in_memory_store_meets_the_tofu_contract() {
    futures::executor::block_on(common::tofu_contract::tofu_contract(
        &InMemoryTofuStore::new(),
        "mem",
    ));
}
