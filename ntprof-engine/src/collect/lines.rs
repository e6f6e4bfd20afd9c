//! The text of source lines, read once per file, in the root of the process whose code names them (a
//! container's sources are its own).

use std::collections::HashMap;

use crate::files::Root;

/// Source files read so far (`None`: unreadable), by root and path.
#[derive(Default)]
pub struct SourceTexts {
    files: HashMap<(i32, String), Option<Vec<String>>>,
}

impl SourceTexts {
    /// The text of `line` (1-based) of `file` in `root`, trimmed at the end; `None` when the file is
    /// unreadable.
    pub fn line(&mut self, root: &Root, file: &str, line: u32) -> Option<String> {
        let lines = self
            .files
            .entry((root.key(), file.to_string()))
            .or_insert_with(|| {
                // A regular file, not waited for (a FIFO) and not read without end (a device).
                let path = std::path::Path::new(file);
                let any = &crate::files::Owners::Any;
                crate::files::read_in(root, path, any, crate::files::SOURCE_CAP)
                    .ok()
                    .map(|b| {
                        String::from_utf8_lossy(&b)
                            .lines()
                            .map(str::to_string)
                            .collect()
                    })
            })
            .as_ref()?;
        let text = lines.get((line as usize).checked_sub(1)?)?;
        Some(text.trim_end().to_string())
    }
}
