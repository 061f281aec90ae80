//! `calls retained`: `get_agent_task` through front and bridge with 10 retained tasks and with
//! `--tasks` (100,000), each stack seeded through the store's API (twenty events on every
//! hundredth task) and loaded alike, the second cycling over all its tasks; CPU per call and p50
//! of each, their ratio, and whether it is within the bound of 1.2× that retention may cost.

use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use crate::answers::Expect;
use crate::load::{self, Plan, Transport, Workload};
use crate::report::{self, Figures, latency};
use crate::servers::Ours;
use crate::wire::mcp_call;
use crate::{LoadArgs, Setup, SetupArgs, cpu, note, say};

/// The bound on the ratio.
const BOUND: f64 = 1.2;
/// The small store.
const FEW: usize = 10;

/// The flags of `calls retained`.
#[derive(Args, Debug)]
pub struct RetainedArgs {
    #[command(flatten)]
    setup: SetupArgs,
    #[command(flatten)]
    load: LoadArgs,
    /// Retained tasks in the large store.
    #[arg(long, default_value_t = 100_000)]
    tasks: usize,
}

fn workload(ours: &Ours, tasks: usize) -> Workload {
    let addr = ours.front.addr;
    let calls = (0..tasks).map(|i| mcp_call(i, addr, Some(&ours.authorization))).collect();
    Workload { transport: Transport::Http(addr), calls: Arc::new(calls), expect: Arc::new(Expect::McpTask) }
}

/// Runs the comparison; `Ok(true)` whatever the verdict (it is printed).
pub async fn main(args: &RetainedArgs) -> anyhow::Result<bool> {
    let setup = Setup::new(&args.setup, None)?;
    let bins = setup.bins()?;
    cpu::check_layout(setup.server_cpu, setup.load_cpu)?;
    cpu::pin_this_thread(setup.server_cpu)?;
    let started = async {
        let few = Ours::start(&bins, FEW, 20).await?;
        let many = Ours::start(&bins, args.tasks, 20).await?;
        anyhow::Ok((few, many))
    }
    .await;
    cpu::pin_every_thread(setup.load_cpu)?;
    let (few, many) = started?;
    note(&format!(
        "seeded {FEW} tasks in {:.2} s and {} tasks in {:.1} s ({:.0} µs a task, through Store::insert_task and three \
         transitions, one transaction each)",
        few.seeded_in.as_secs_f64(),
        args.tasks,
        many.seeded_in.as_secs_f64(),
        many.seeded_in.as_secs_f64() * 1e6 / args.tasks as f64
    ));
    let check = |ours: &Ours| -> anyhow::Result<[u32; 2]> {
        let pids = [ours.bridge_pid()?, ours.front_pid()?];
        cpu::check_pinned("the bridge", pids[0], setup.server_cpu)?;
        cpu::check_pinned("the front", pids[1], setup.server_cpu)?;
        Ok(pids)
    };
    let pids = [check(&few)?, check(&many)?];
    let loads = [workload(&few, FEW), workload(&many, args.tasks)];
    let names = [format!("{FEW} retained"), format!("{} retained", report::grouped(args.tasks as f64))];
    let plan: Plan = args.load.plan();
    let mut runs: [Vec<Figures>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=args.load.repeat {
        for i in 0..2 {
            let sample = load::run(&loads[i], &pids[i], &setup.meter(), plan)
                .await
                .with_context(|| format!("the run with {}", names[i]))?;
            let f = Figures::of(&names[i], &["bridge", "front"], &sample, false);
            note(&format!(
                "run {round}/{}: {}: {:.1} µs CPU per call, p50 {}",
                args.load.repeat,
                names[i],
                f.cpu_us,
                latency(f.p50_us)
            ));
            runs[i].push(f);
        }
    }
    check(&few)?;
    check(&many)?;
    let [small, large] = [report::median(&runs[0]), report::median(&runs[1])];
    let ratio = large.cpu_us / small.cpu_us;
    say(&format!(
        "# calls retained: get_agent_task through front and bridge, {} connections, {} s after {} s, median of {}\n",
        plan.connections,
        plan.duration.as_secs_f64(),
        plan.warmup.as_secs_f64(),
        args.load.repeat
    ));
    say(&report::table(&[small.clone(), large.clone()]));
    if let Some(noise) = report::noise(&[small.clone(), large.clone()]) {
        say(&noise);
    }
    say(&format!(
        "CPU per call at {} ÷ at {FEW}: {ratio:.2} ({}: the bound is ≤ {BOUND}); p50 {} vs {} ({:.2}×)",
        names[1],
        if ratio <= BOUND { "WITHIN the issue's bound" } else { "OVER the issue's bound" },
        latency(large.p50_us),
        latency(small.p50_us),
        large.p50_us / small.p50_us
    ));
    Ok(true)
}
