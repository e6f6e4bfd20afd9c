//! CSV: one row per (source, process, module, function, file, line, bucket address, samples), with a header row.
//!
//! Columns: `source, pid, command, module, function, inlined, file, line, address, offset, samples, value, unit`.
//! `pid` and `command` are the process the samples were taken in and the command it ran then.
//! `function` is the function that holds the bucket (the outermost frame), `inlined` the innermost inlined function
//! at the bucket's address (empty when none), `file`/`line` the innermost frame's source line; `address` is the
//! bucket's runtime start, `offset` the same in the object's own address space (what `addr2line -e FILE` takes),
//! both hex; `value` is `samples` in the source's `unit` (nanoseconds for time sources, events otherwise). The
//! samples that fell outside every profiled module are one more row per source and process, module `[outside]`,
//! with an empty address, so that the rows of a source add up to counted + outside.

use crate::report::Report;

/// The header row.
pub const HEADER: [&str; 13] = [
    "source", "pid", "command", "module", "function", "inlined", "file", "line", "address",
    "offset", "samples", "value", "unit",
];

/// The CSV text of a report.
pub fn render(report: &Report) -> Result<Vec<u8>, String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let fail = |e: csv::Error| format!("cannot write CSV: {e}");
    w.write_record(HEADER).map_err(fail)?;
    for source in &report.sources {
        for bucket in source.buckets.iter().filter(|b| b.samples > 0) {
            let outer = bucket.frames.last();
            let inner = bucket.frames.first();
            let function = match outer {
                Some(frame) => frame.function.clone(),
                None => format!("{}+{:#x}", bucket.module, bucket.offset),
            };
            let inlined = match inner {
                Some(frame) if frame.inlined => frame.function.as_str(),
                _ => "",
            };
            let file = inner.and_then(|f| f.file.as_deref()).unwrap_or("");
            let line = inner
                .and_then(|f| f.line)
                .map(|l| l.to_string())
                .unwrap_or_default();
            w.write_record([
                source.name.as_str(),
                bucket.pid.to_string().as_str(),
                bucket.command.as_str(),
                bucket.module.as_str(),
                function.as_str(),
                inlined,
                file,
                line.as_str(),
                format!("{:#x}", bucket.address).as_str(),
                format!("{:#x}", bucket.offset).as_str(),
                bucket.samples.to_string().as_str(),
                bucket
                    .samples
                    .saturating_mul(source.sample_value)
                    .to_string()
                    .as_str(),
                source.sample_unit.as_str(),
            ])
            .map_err(fail)?;
        }
        // Outside: one row per process with such samples, and one without a process for any rest.
        let mut rows: Vec<(String, &str, u64)> = source
            .processes
            .iter()
            .filter(|p| p.outside > 0)
            .map(|p| {
                let command = report
                    .processes
                    .get(p.process as usize)
                    .map_or("", |r| r.command.as_str());
                (p.pid.to_string(), command, p.outside)
            })
            .collect();
        let listed: u64 = rows.iter().map(|r| r.2).sum();
        if source.stats.outside > listed {
            rows.push((String::new(), "", source.stats.outside - listed));
        }
        for (pid, command, n) in rows {
            w.write_record([
                source.name.as_str(),
                pid.as_str(),
                command,
                "[outside]",
                "",
                "",
                "",
                "",
                "",
                "",
                n.to_string().as_str(),
                n.saturating_mul(source.sample_value).to_string().as_str(),
                source.sample_unit.as_str(),
            ])
            .map_err(fail)?;
        }
    }
    w.into_inner().map_err(|e| format!("cannot write CSV: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::fixture;

    #[test]
    fn header_bucket_rows_and_outside_with_quoting() {
        let text = String::from_utf8(render(&fixture::report()).unwrap()).unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(
            rows[0],
            "source,pid,command,module,function,inlined,file,line,address,offset,samples,value,unit"
        );
        assert_eq!(
            rows[1],
            "Timer,4242,demo,demo,hot_a,,/src/demo.c,12,0x555500001130,0x1130,350,350000000,nanoseconds"
        );
        assert_eq!(
            rows[2],
            "Timer,4242,demo,demo,hot_a,mix,/src/mix.h,3,0x555500001140,0x1140,250,250000000,nanoseconds"
        );
        assert_eq!(
            rows[3],
            "Timer,4242,demo,libhot.so,hot_b,,\"/src/hot, \"\"b\"\".c\",7,0x7f0000001100,0x1100,300,300000000,nanoseconds"
        );
        assert_eq!(
            rows[4],
            "Timer,4242,demo,[outside],,,,,,,100,100000000,nanoseconds"
        );
        assert_eq!(rows.len(), 5);
        // Read back with a CSV reader: the quoted file name is one field again.
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let total: u64 = r
            .records()
            .map(|rec| rec.unwrap()[10].parse::<u64>().unwrap())
            .sum();
        assert_eq!(total, 1000);
    }
}
