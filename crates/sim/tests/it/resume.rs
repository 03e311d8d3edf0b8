//! States the real supervisor reaches over seeded schedules of faults,
//! commands, edits and shutdowns (the simulation's own steps): each, at
//! every step, round-trips through an upgrade's serialization to the same
//! core.

use proptest::prelude::*;
use supervise_core::Core;

use model::spec::{Readiness, RestartPolicy};
use sim::{CommandKind, Edit, Step, World, app, ending_on_its_own, probe};

fn step() -> impl Strategy<Value = Step> {
    let kind = prop_oneof![
        Just(CommandKind::Reload),
        Just(CommandKind::Restart),
        Just(CommandKind::Stop),
        Just(CommandKind::Start),
    ];
    prop_oneof![
        4 => (1u64..2500).prop_map(Step::Wait),
        2 => (0usize..8, 0i32..3).prop_map(|(process, code)| Step::Crash { process, code }),
        1 => (0usize..8).prop_map(|process| Step::Probe { process }),
        1 => (0usize..8).prop_map(|process| Step::Notify { process, foreign: false }),
        1 => (kind, 0usize..3, proptest::option::of(0u32..3))
            .prop_map(|(kind, app, slot)| Step::Command { kind, app, slot }),
        1 => (0usize..3, 0u32..4).prop_map(|(app, instances)| Step::Edit(Edit::Scale { app, instances })),
        1 => (0usize..3, 0u32..100).prop_map(|(app, value)| Step::Edit(Edit::Env { app, value })),
        1 => (0usize..3).prop_map(|app| Step::Edit(Edit::Remove { app })),
        1 => Just(Step::Edit(Edit::Add)),
        1 => Just(Step::SpawnsFail),
        1 => Just(Step::SpawnsWork),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn every_state_round_trips(steps in proptest::collection::vec(step(), 1..40), sigterm in any::<bool>()) {
        let mut job = ending_on_its_own(app("job", 1, Readiness::Immediate), std::time::Duration::from_millis(300), 1);
        job.restart = RestartPolicy::OnFailure;
        let mut world = World::new(vec![
            app("web", 2, Readiness::Delay(std::time::Duration::from_millis(200))),
            app("probed", 2, probe(2)),
            job,
        ]);
        let mut steps = steps;
        if sigterm {
            steps.push(Step::Sigterm);
            steps.push(Step::Wait(500));
        }
        for step in steps {
            // A violation is the simulation's business, not this test's.
            let _ = world.step(step);
            let core = world.supervisor.core();
            let restored = round_trip(core);
            // A turn's budget of starts is not handed over.
            prop_assert_eq!(without_budget(core), without_budget(&restored));
        }
    }
}

/// `core` written out and read back, as across an upgrade's exec; the
/// restored core serializes to the same text.
fn round_trip(core: &Core) -> Core {
    let json = serde_json::to_vec(core).expect("a core serializes");
    let restored: Core = serde_json::from_slice(&json).expect("and deserializes");
    let again = serde_json::to_vec(&restored).expect("a restored core serializes");
    assert_eq!(
        String::from_utf8_lossy(&json),
        String::from_utf8_lossy(&again),
        "serializing the restored core gives the same text"
    );
    restored
}

/// The core's `Debug`, but for the starts left in the current turn.
fn without_budget(core: &Core) -> String {
    let text = format!("{core:?}");
    match text.find("spawn_budget: ") {
        Some(at) => {
            let end = text[at..].find(',').map_or(text.len(), |e| at + e);
            format!("{}{}", &text[..at], &text[end..])
        }
        None => text,
    }
}
