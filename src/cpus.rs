//! CPU sets: CPU list syntax (`0-3,5`, as in `taskset -c` and `Cpus_allowed_list`) and the
//! runner's allowed CPUs (`sched_getaffinity`). A leaf: imports no other module of the crate.

/// The CPUs this process may run on, ascending (`sched_getaffinity(0)`).
///
/// # Errors
/// The OS error from `sched_getaffinity`.
pub fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    let set = rustix::thread::sched_getaffinity(None).map_err(std::io::Error::from)?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| set.is_set(c))
        .collect())
}

/// CPU numbers at or above this cannot be in an affinity mask (`CPU_SETSIZE`).
pub const MAX_CPUS: usize = rustix::thread::CpuSet::MAX_CPU;

/// Parses a Linux CPU list as in `Cpus_allowed_list` or `taskset -c`: `"0-3,5,7-8"`.
///
/// # Errors
/// A message naming the bad part.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let part = part.trim();
        let num = |s: &str| {
            let n = s
                .trim()
                .parse::<usize>()
                .map_err(|_| format!("`{part}` is not a CPU number or range like `2-3`"))?;
            if n >= MAX_CPUS {
                return Err(format!(
                    "CPU {n} is beyond the largest CPU number this system can address ({})",
                    MAX_CPUS - 1
                ));
            }
            Ok(n)
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("`{part}`: range start is above its end"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    Ok(out)
}

/// Formats CPUs as a compact list: `[0,1,2,5]` -> `"0-2,5"`.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip() {
        assert_eq!(parse_cpu_list("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert_eq!(format_cpu_list(&[0, 1, 2, 5]), "0-2,5");
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert!(
            parse_cpu_list("0-4294967295").is_err(),
            "no allocation of a huge range"
        );
        assert!(parse_cpu_list("99999").is_err());
        assert!(!allowed_cpus().unwrap().is_empty());
    }
}
