//! Every interleaving of the start/stop protocol: when the stop returns, every sample the kernel wrote while
//! the profile was started is counted, and nothing is counted afterwards. The two broken variants show that the
//! model can fail.

use ntprofile_loom::{Variant, start_stop};

fn check(variant: Variant) {
    let mut model = loom::model::Builder::new();
    // Bounded preemptions keep the search finite with the consumer's polling loop; 3 covers every ordering
    // of the protocol's steps that the assertions depend on.
    model.preemption_bound = Some(3);
    model.check(move || {
        let (at_stop, at_end, written, _lost) = start_stop(variant, 3);
        assert_eq!(
            at_stop, written,
            "a sample written before the stop was not counted by then"
        );
        assert_eq!(
            at_end, at_stop,
            "the buffer changed after the stop returned"
        );
    });
}

#[test]
fn stop_is_a_barrier_and_start_publishes_first() {
    check(Variant::Correct);
}

#[test]
#[should_panic(expected = "not counted")]
fn a_stop_that_does_not_drain_is_caught() {
    check(Variant::NoDrainOnUnpublish);
}

#[test]
#[should_panic(expected = "not counted")]
fn enabling_before_publishing_is_caught() {
    check(Variant::EnableBeforePublish);
}
