//! Command lines in the text report, one line each: a control character in an argument (the newlines of a
//! `python3 -c` script, a tab) is written as its escape (`\n`, `\t`, `\r`, `\x1b`), so that it cannot break
//! the report's lines or drive the terminal. The JSON report keeps the arguments as they were.

/// `s` with its control characters escaped.
pub fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("plain -c x"), "plain -c x");
        assert_eq!(
            printable("import os\nfor i in x:\n\tpass\r\u{1b}[2J"),
            "import os\\nfor i in x:\\n\\tpass\\r\\x1b[2J"
        );
        assert_eq!(printable("x\u{85}y"), "x\\x85y");
    }
}
