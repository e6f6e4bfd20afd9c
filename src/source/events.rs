//! The perf event behind each source: a generic hardware, cache or software event, a registered raw event, or
//! none when Linux has no generic event for it.

use super::ProfileSource;
use super::registry::registered;
use crate::perf::PerfEventSpec;
use crate::perf::event::abi;

const fn ev(type_: u32, config: u64, name: &'static str) -> Option<PerfEventSpec> {
    Some(PerfEventSpec {
        type_,
        config,
        config1: 0,
        config2: 0,
        name,
    })
}

/// A cache read event (`PERF_COUNT_HW_CACHE_OP_READ`) of `cache` with `result` (access or miss).
const fn hw_cache(cache: u64, result: u64, name: &'static str) -> Option<PerfEventSpec> {
    ev(
        abi::TYPE_HW_CACHE,
        abi::hw_cache_config(cache, abi::CACHE_OP_READ, result),
        name,
    )
}

impl ProfileSource {
    /// The perf event behind this source, or `None` when Linux has no generic event for it.
    pub fn perf_event(self) -> Option<PerfEventSpec> {
        use ProfileSource::*;
        match self {
            Registered(n) => registered(n),
            Time => ev(abi::TYPE_SOFTWARE, abi::SW_CPU_CLOCK, "cpu-clock"),
            AlignmentFixup | AlignmentFaults => ev(
                abi::TYPE_SOFTWARE,
                abi::SW_ALIGNMENT_FAULTS,
                "alignment-faults",
            ),
            TotalIssues | InstructionRetired => {
                ev(abi::TYPE_HARDWARE, abi::HW_INSTRUCTIONS, "instructions")
            }
            TotalCycles | UnhaltedCoreCycles => {
                ev(abi::TYPE_HARDWARE, abi::HW_CPU_CYCLES, "cpu-cycles")
            }
            UnhaltedReferenceCycles => ev(abi::TYPE_HARDWARE, abi::HW_REF_CPU_CYCLES, "ref-cycles"),
            BranchInstructions | BranchInstructionRetired => ev(
                abi::TYPE_HARDWARE,
                abi::HW_BRANCH_INSTRUCTIONS,
                "branch-instructions",
            ),
            BranchMispredictions | BranchMispredictsRetired => {
                ev(abi::TYPE_HARDWARE, abi::HW_BRANCH_MISSES, "branch-misses")
            }
            CacheMisses | LlcMisses => ev(abi::TYPE_HARDWARE, abi::HW_CACHE_MISSES, "cache-misses"),
            LlcReference => ev(
                abi::TYPE_HARDWARE,
                abi::HW_CACHE_REFERENCES,
                "cache-references",
            ),
            DcacheMisses => hw_cache(
                abi::CACHE_L1D,
                abi::CACHE_RESULT_MISS,
                "L1-dcache-load-misses",
            ),
            DcacheAccesses => hw_cache(abi::CACHE_L1D, abi::CACHE_RESULT_ACCESS, "L1-dcache-loads"),
            IcacheMisses => hw_cache(
                abi::CACHE_L1I,
                abi::CACHE_RESULT_MISS,
                "L1-icache-load-misses",
            ),
            IcacheIssues => hw_cache(abi::CACHE_L1I, abi::CACHE_RESULT_ACCESS, "L1-icache-loads"),
            PipelineDry => ev(
                abi::TYPE_HARDWARE,
                abi::HW_STALLED_CYCLES_FRONTEND,
                "stalled-cycles-frontend",
            ),
            PipelineFrozen => ev(
                abi::TYPE_HARDWARE,
                abi::HW_STALLED_CYCLES_BACKEND,
                "stalled-cycles-backend",
            ),
            TaskClock => ev(abi::TYPE_SOFTWARE, abi::SW_TASK_CLOCK, "task-clock"),
            PageFaults => ev(abi::TYPE_SOFTWARE, abi::SW_PAGE_FAULTS, "page-faults"),
            ContextSwitches => ev(
                abi::TYPE_SOFTWARE,
                abi::SW_CONTEXT_SWITCHES,
                "context-switches",
            ),
            CpuMigrations => ev(abi::TYPE_SOFTWARE, abi::SW_CPU_MIGRATIONS, "cpu-migrations"),
            MinorFaults => ev(abi::TYPE_SOFTWARE, abi::SW_PAGE_FAULTS_MIN, "minor-faults"),
            MajorFaults => ev(abi::TYPE_SOFTWARE, abi::SW_PAGE_FAULTS_MAJ, "major-faults"),
            LoadInstructions | TotalNonissues | StoreInstructions | FpInstructions
            | IntegerInstructions | Issue2 | Issue3 | Issue4 | SpecialInstructions
            | MemoryBarrierCycles | LoadLinkedIssues => None,
        }
    }

    /// True for sources backed by a hardware performance counter (a registered raw event counts as hardware
    /// unless it is a software or tracepoint event).
    pub fn is_hardware(self) -> bool {
        match self.perf_event() {
            Some(e) if matches!(self, ProfileSource::Registered(_)) => {
                !e.is_software_or_tracepoint()
            }
            Some(e) => e.is_generic_hardware(),
            None => true,
        }
    }
}
