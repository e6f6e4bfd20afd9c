//! The text of source lines, read once per file.

use std::collections::HashMap;

/// Source files read so far (`None`: unreadable).
#[derive(Default)]
pub struct SourceTexts {
    files: HashMap<String, Option<Vec<String>>>,
}

impl SourceTexts {
    /// The text of `line` (1-based) of `file`, trimmed at the end; `None` when the file is unreadable.
    pub fn line(&mut self, file: &str, line: u32) -> Option<String> {
        let lines = self
            .files
            .entry(file.to_string())
            .or_insert_with(|| {
                // A regular file, not waited for (a FIFO) and not read without end (a device).
                let path = std::path::Path::new(file);
                crate::files::read(path, &crate::files::Owners::Any, crate::files::SOURCE_CAP)
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
