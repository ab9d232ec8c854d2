//! Linux `/proc` facts about this process and machine, parsed in one place: the process's own
//! memory (`/proc/self/status`), its threads' CPU time (`schedstat`), the load average, the CPU
//! (`/proc/cpuinfo`) and the installed memory. Each parser takes the file's text, so it is
//! tested on fixed samples; the readers return `None` where the file is missing (other systems).

/// A `kB` field of a `/proc/<pid>/status` text, e.g. `VmRSS`, `VmHWM`.
pub fn status_field_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// A `kB` field of this process's `/proc/self/status`.
pub fn own_status_kib(key: &str) -> Option<u64> {
    status_field_kib(&std::fs::read_to_string("/proc/self/status").ok()?, key)
}

/// The time spent on a CPU, in nanoseconds, of a `/proc/<pid>/task/<tid>/schedstat` text (its
/// first field; the second is the time spent waiting for a CPU).
pub fn parse_schedstat_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().next()?.parse().ok()
}

/// The CPU time of all of this process's threads so far, in nanoseconds: unlike wall time, it does
/// not grow while other work holds the CPUs. Threads that have exited are not counted (read it
/// around work on threads that stay, such as rayon's pool), and a running thread's count is
/// brought up to date only at scheduler ticks (a few ms): for calls of a second or more.
pub fn process_cpu_ns() -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path().join("schedstat");
        total += parse_schedstat_ns(&std::fs::read_to_string(path).ok()?)?;
    }
    Some(total)
}

/// The 1, 5 and 15 minute load averages of a `/proc/loadavg` text, space-separated.
pub fn parse_load_average(loadavg: &str) -> Option<String> {
    let fields: Vec<&str> = loadavg.split_whitespace().take(3).collect();
    (fields.len() == 3).then(|| fields.join(" "))
}

/// This machine's load averages (other work on the machine skews timings).
pub fn load_average() -> Option<String> {
    parse_load_average(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// `MemTotal` of a `/proc/meminfo` text, in KiB.
pub fn parse_mem_total_kib(meminfo: &str) -> Option<u64> {
    status_field_kib(meminfo, "MemTotal")
}

/// This machine's installed memory in KiB.
pub fn mem_total_kib() -> Option<u64> {
    parse_mem_total_kib(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// What `/proc/cpuinfo` says about the CPU.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CpuInfo {
    /// x86: `model name`; some ARM kernels: `Model` or `Hardware`.
    pub model: Option<String>,
    /// One `processor` entry per logical CPU.
    pub logical_cpus: usize,
    /// The `flags` line (x86), split.
    pub flags: Vec<String>,
}

impl CpuInfo {
    pub fn parse(text: &str) -> Self {
        let field = |key: &str| {
            text.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == key && !v.trim().is_empty()).then(|| v.trim().to_string())
            })
        };
        CpuInfo {
            model: field("model name")
                .or_else(|| field("Model"))
                .or_else(|| field("Hardware")),
            logical_cpus: text
                .lines()
                .filter(|l| {
                    l.split_once(':')
                        .is_some_and(|(k, _)| k.trim() == "processor")
                })
                .count(),
            flags: field("flags")
                .map(|f| f.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
        }
    }

    /// This machine's `/proc/cpuinfo`.
    pub fn read() -> Option<Self> {
        Some(Self::parse(&std::fs::read_to_string("/proc/cpuinfo").ok()?))
    }

    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_x86_and_arm_cpuinfo() {
        let x86 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma avx512f\n\n\
                   processor\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma avx512f\n";
        let info = CpuInfo::parse(x86);
        assert_eq!(info.model.as_deref(), Some("AMD EPYC"));
        assert_eq!(info.logical_cpus, 2);
        assert!(info.has_flag("avx512f") && !info.has_flag("avx512_bf16"));

        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n\nHardware\t: BCM2835\nModel\t\t: Raspberry Pi 4\n";
        let info = CpuInfo::parse(arm);
        assert_eq!(info.model.as_deref(), Some("Raspberry Pi 4"));
        assert_eq!(info.logical_cpus, 1);
        assert!(info.flags.is_empty());

        assert_eq!(CpuInfo::parse("model name\t:   \n"), CpuInfo::default());
    }

    #[test]
    fn reads_status_loadavg_and_meminfo() {
        let status = "Name:\thsdiff\nVmRSS:\t    7460 kB\nVmHWM:\t    8868 kB\n";
        assert_eq!(status_field_kib(status, "VmRSS"), Some(7460));
        assert_eq!(status_field_kib(status, "VmHWM"), Some(8868));
        assert_eq!(status_field_kib(status, "VmSwap"), None);
        assert_eq!(
            parse_load_average("0.52 0.61 0.70 2/345 6789\n").as_deref(),
            Some("0.52 0.61 0.70")
        );
        assert_eq!(parse_load_average("0.52\n"), None);
        assert_eq!(parse_schedstat_ns("151484 1843237 2\n"), Some(151484));
        assert_eq!(parse_schedstat_ns(""), None);
        assert_eq!(
            parse_mem_total_kib("MemTotal:       24596828 kB\nMemFree: 1 kB\n"),
            Some(24596828)
        );
    }
}
