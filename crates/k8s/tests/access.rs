//! `AllowedCache` against the real control plane: a burst of the same question meeting an empty
//! cache sends one SubjectAccessReview, whose answer the others share; a denial is shared only
//! while it is in flight, never remembered; a dropped asker leaves no one waiting.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::time::Duration;

use common::admin;
use nodeauth_k8s::access::{AllowedCache, Requester, csr_resource};
use nodeauth_testenv::unique_name;

/// A user kube-apiserver allows everything (`system:masters`), named for this test alone.
fn master() -> Requester {
    Requester {
        user: unique_name("access-master"),
        groups: vec!["system:masters".into()],
        ..Requester::default()
    }
}

/// A user with no grants at all.
fn nobody() -> Requester {
    Requester {
        user: unique_name("access-nobody"),
        ..Requester::default()
    }
}

/// `(allowed, sent no review)` of `n` calls polled together, the way concurrent reconciles
/// meet: every call is polled once before any answer can arrive.
async fn burst(
    cache: &AllowedCache,
    client: &kube::Client,
    who: &Requester,
    n: usize,
) -> Vec<(bool, bool)> {
    futures::future::join_all(
        (0..n).map(|_| cache.may(client, who, csr_resource("create", Some("nodeclient")))),
    )
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect()
}

#[tokio::test]
async fn a_burst_of_one_allowed_question_sends_one_review_and_remembers_it() {
    let client = admin().await;
    let cache = AllowedCache::new(Duration::from_secs(600));
    let who = master();
    let answers = burst(&cache, &client, &who, 20).await;
    assert!(answers.iter().all(|(allowed, _)| *allowed), "{answers:?}");
    let asked = answers.iter().filter(|(_, shared)| !shared).count();
    assert_eq!(asked, 1, "one review for the burst: {answers:?}");
    // Remembered afterwards.
    assert_eq!(burst(&cache, &client, &who, 1).await, vec![(true, true)]);
    assert_eq!(cache.len(), 1);
}

#[tokio::test]
async fn a_denial_is_shared_while_in_flight_and_never_remembered() {
    let client = admin().await;
    let cache = AllowedCache::new(Duration::from_secs(600));
    let who = nobody();
    let answers = burst(&cache, &client, &who, 20).await;
    assert!(answers.iter().all(|(allowed, _)| !allowed), "{answers:?}");
    assert_eq!(
        answers.iter().filter(|(_, shared)| !shared).count(),
        1,
        "{answers:?}"
    );
    // Asked afresh next time: a permission granted since is honoured at once.
    assert_eq!(burst(&cache, &client, &who, 1).await, vec![(false, false)]);
    assert!(cache.is_empty());
}

#[tokio::test]
async fn different_questions_are_not_shared() {
    let client = admin().await;
    let cache = AllowedCache::new(Duration::from_secs(600));
    let (a, b) = (master(), nobody());
    let (ra, rb) = futures::join!(burst(&cache, &client, &a, 5), burst(&cache, &client, &b, 5));
    assert!(ra.iter().all(|(allowed, _)| *allowed), "{ra:?}");
    assert!(rb.iter().all(|(allowed, _)| !allowed), "{rb:?}");
    assert_eq!(ra.iter().filter(|(_, s)| !s).count(), 1, "{ra:?}");
    assert_eq!(rb.iter().filter(|(_, s)| !s).count(), 1, "{rb:?}");
}

#[tokio::test]
async fn a_waiter_whose_asker_is_dropped_asks_for_itself() {
    let client = admin().await;
    let cache = AllowedCache::new(Duration::from_secs(600));
    let who = master();
    let question = || csr_resource("create", Some("nodeclient"));
    let mut first = Box::pin(cache.may(&client, &who, question()));
    assert!(futures::poll!(first.as_mut()).is_pending());
    let mut second = Box::pin(cache.may(&client, &who, question()));
    assert!(
        futures::poll!(second.as_mut()).is_pending(),
        "waits for the first"
    );
    drop(first);
    let answer = tokio::time::timeout(Duration::from_secs(30), second)
        .await
        .expect("the waiter must not hang when the asker is gone")
        .unwrap();
    assert_eq!(answer, (true, false), "it asked for itself");
    // The dropped asker left nothing behind: a third call finds the remembered answer.
    assert_eq!(
        cache.may(&client, &who, question()).await.unwrap(),
        (true, true)
    );
}
