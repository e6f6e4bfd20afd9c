//! Function names as the text tables show them: a C++ function without its parameter list and without the
//! return type a template function's demangled name begins with (`double run_kernel<Acc<double>, double>(Acc<double>&,
//! int)` is shown `run_kernel<Acc<double>, double>`), as perf and pprof show C++ names by default. The full demangled
//! name stays in JSON, CSV, folded stacks, the flame graph and pprof.
//!
//! The name is scanned once, counting nesting in `<>`, `()`, `[]` and `{}` (lambdas: `{lambda(int)#1}`), stepping
//! over operator names (`operator()`, `operator<<`, `operator< <int>`) and `(anonymous namespace)`. The parameter
//! list is the first parenthesis at the top level; the return type is what precedes the last top-level space
//! before the qualified name (an `operator new` or `operator int` keeps its space). A `[clone .constprop.0]`
//! suffix stays: it tells copies of a function apart. Names without a top-level parenthesis (C, Rust, assembly,
//! `module+0x…`) are shown as they are, and so are JIT names that cannot be C++ (`RegExp:(a|b)`).

/// How a text table shows a set of functions in one column of at least `min` characters: each name as
/// [`display_name`] shows it, with its middle elided (`v8::internal…GraphReducer::ReduceTop`: the start and the
/// informative end stay) when it is longer than the column. Two different functions never print the same
/// text: where two display names are equal (C++ overloads without their parameter lists) the full names are
/// shown, and where eliding would make two texts equal each keeps the part where it differs from the others
/// ([`distinct`]), the column widened only when that part itself does not fit. Returns the column's width and
/// each name's text, in the order of `names`.
pub fn fit_column(names: &[&str], min: usize) -> (usize, Vec<String>) {
    fit_column_in(names, min, Some(min))
}

/// [`fit_column`] in a column of `min` up to `cap` characters (`None`: no limit, every name whole, as where the
/// report goes to a file or a pipe rather than a terminal).
pub fn fit_column_in(names: &[&str], min: usize, cap: Option<usize>) -> (usize, Vec<String>) {
    use std::collections::HashMap;
    let mut shown: Vec<String> = names.iter().map(|n| display_name(n).into_owned()).collect();
    // Equal display names of different functions (overloads, whose parameter lists differ): their full names.
    // A name without a parameter list (DWARF's name of an inlined copy) is the same function as its full name.
    let mut by_text: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, t) in shown.iter().enumerate() {
        if t != names[i] {
            by_text.entry(t.as_str()).or_default().push(i);
        }
    }
    let overloaded: Vec<usize> = by_text
        .values()
        .filter(|ix| ix.iter().any(|&i| names[i] != names[ix[0]]))
        .flatten()
        .copied()
        .collect();
    for i in overloaded {
        shown[i] = names[i].to_string();
    }
    fit_shown(shown, names, min, cap)
}

/// [`fit_column_in`] for names shown as they are (modules, files): no C++ shortening.
pub fn fit_plain(names: &[&str], min: usize, cap: Option<usize>) -> (usize, Vec<String>) {
    fit_shown(
        names.iter().map(|n| n.to_string()).collect(),
        names,
        min,
        cap,
    )
}

/// The column of `shown`, the texts of `names` (see [`fit_column_in`]).
fn fit_shown(
    shown: Vec<String>,
    names: &[&str],
    min: usize,
    cap: Option<usize>,
) -> (usize, Vec<String>) {
    use std::collections::HashMap;
    let longest = shown.iter().map(|t| t.chars().count()).max().unwrap_or(0);
    let Some(cap) = cap else {
        return (longest.max(min), shown);
    };
    let mut width = cap.max(min).max(4);
    loop {
        let texts = distinct(&shown, names, width);
        let mut seen: HashMap<&str, &str> = HashMap::new();
        let unique = texts
            .iter()
            .zip(names)
            .all(|(t, n)| *seen.entry(t.as_str()).or_insert(n) == *n);
        if unique || width >= longest {
            return (width.min(longest).max(min), texts);
        }
        width = (width + 8).min(longest);
    }
}

/// Each of `shown` (the texts of `names`) in at most `width` characters, its middle elided; where two different
/// names would then print alike, each keeps the part where it differs from the others (their common start and
/// end elided around it: `libpython…_alpha_…-gnu.so`, `libpython…_beta_…-gnu.so`), when that part fits.
pub fn distinct(shown: &[String], names: &[&str], width: usize) -> Vec<String> {
    use std::collections::HashMap;
    let mut texts: Vec<String> = shown.iter().map(|t| elide_middle(t, width)).collect();
    let mut groups: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, t) in texts.iter().enumerate() {
        groups.entry(t.as_str()).or_default().push(i);
    }
    let mut fixed: Vec<(usize, String)> = Vec::new();
    for group in groups.values().filter(|g| g.len() > 1) {
        for &i in group {
            let mine: Vec<char> = shown[i].chars().collect();
            // The widest common start and end this name shares with another one of the group.
            let (mut prefix, mut suffix) = (mine.len(), mine.len());
            let mut any = false;
            for &j in group.iter().filter(|&&j| names[j] != names[i]) {
                let other: Vec<char> = shown[j].chars().collect();
                let p = mine.iter().zip(&other).take_while(|(a, b)| a == b).count();
                let most = mine.len().min(other.len()) - p;
                let s = mine
                    .iter()
                    .rev()
                    .zip(other.iter().rev())
                    .take(most)
                    .take_while(|(a, b)| a == b)
                    .count();
                (prefix, suffix, any) = (prefix.min(p), suffix.min(s), true);
            }
            if let Some(t) = any
                .then(|| keep_span(&mine, prefix, suffix, width))
                .flatten()
            {
                fixed.push((i, t));
            }
        }
    }
    for (i, t) in fixed {
        texts[i] = t;
    }
    texts
}

/// `name` in at most `width` characters keeping whole what lies between its first `prefix` and last `suffix`
/// characters, with as much of its start and end as fits; `None` when that part alone does not fit.
fn keep_span(name: &[char], prefix: usize, suffix: usize, width: usize) -> Option<String> {
    let n = name.len();
    if n <= width {
        return Some(name.iter().collect());
    }
    let span = n - prefix - suffix;
    let budget = width.checked_sub(span + 2)?;
    let head = prefix.min(budget / 3);
    let tail = suffix.min(budget - head);
    let mut out: String = name[..head].iter().collect();
    if head < prefix {
        out.push('…');
    }
    out.extend(&name[prefix..n - suffix]);
    if tail < suffix {
        out.push('…');
    }
    out.extend(&name[n - tail..]);
    Some(out)
}

/// [`fit_column_in`] for the distinct names of a section whose lines are not a column (callers, a call tree):
/// each name's text, none longer than the section's width (`min` up to `cap`; `None`: whole).
pub fn fit_all<'a>(
    names: impl IntoIterator<Item = &'a str>,
    min: usize,
    cap: Option<usize>,
) -> std::collections::HashMap<&'a str, String> {
    let mut each: Vec<&str> = names.into_iter().collect();
    each.sort_unstable();
    each.dedup();
    let (_, texts) = fit_column_in(&each, min, cap);
    each.into_iter().zip(texts).collect()
}

/// `name` in at most `width` characters: the first third and the last two thirds, `…` between.
fn elide_middle(name: &str, width: usize) -> String {
    let n = name.chars().count();
    if n <= width {
        return name.to_string();
    }
    let head = (width - 1) / 3;
    let tail = width - 1 - head;
    let start: String = name.chars().take(head).collect();
    let end: String = name.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

/// How the text tables show `name`, with a `[clone …]` suffix kept.
pub fn display_name(name: &str) -> std::borrow::Cow<'_, str> {
    let Some((start, end)) = short_parts(name) else {
        return name.into();
    };
    let short = &name[start..end];
    match name[end..].find(" [clone ") {
        Some(at) => format!("{short}{}", &name[end + at..]).into(),
        None => short.into(),
    }
}

const ANONYMOUS: &str = "(anonymous namespace)";

/// The byte range of the shortened name, or `None` when the name has no top-level parameter list.
fn short_parts(name: &str) -> Option<(usize, usize)> {
    let b = name.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    // Top-level spaces, and where the first top-level `operator` starts.
    let (mut spaces, mut operator) = (Vec::new(), None);
    while i < b.len() {
        if name[i..].starts_with(ANONYMOUS) {
            i += ANONYMOUS.len();
            continue;
        }
        if name[i..].starts_with("operator")
            && (i == 0 || matches!(b[i - 1], b':' | b' ' | b'{'))
            && !b
                .get(i + 8)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            if depth == 0 && operator.is_none() {
                operator = Some(i);
            }
            i += 8;
            let rest = &name[i..];
            if rest.starts_with("()") || rest.starts_with("[]") {
                i += 2;
            } else {
                i += rest
                    .bytes()
                    .take_while(|c| b"<>=!+-*/%^&|~,".contains(c))
                    .count();
            }
            continue;
        }
        match b[i] {
            // A parameter list followed by `::` is an enclosing function's (`f()::{lambda()#1}::operator()`):
            // part of the qualified name.
            b'(' if depth == 0 && scope_after_parens(&b[i..]) => depth += 1,
            // A Go method's receiver (`runtime.(*mheap).alloc`) follows a `.`: part of the name, never a
            // parameter list (its head alone, `runtime.`, would name nothing).
            b'(' if depth == 0 && i > 0 && b[i - 1] == b'.' => depth += 1,
            b'(' if depth == 0 => {
                let start = operator
                    .map_or(spaces.last().copied(), |op| {
                        spaces.iter().rev().find(|&&s| s < op).copied()
                    })
                    .map_or(0, |s| s + 1);
                return (start < i && cpp_like(&name[..i])).then_some((start, i));
            }
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' | b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b' ' if depth == 0 => spaces.push(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Whether the parenthesized group at the start of `b` is followed by `::`.
fn scope_after_parens(b: &[u8]) -> bool {
    let mut depth = 0usize;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return b[i + 1..].starts_with(b"::");
                }
            }
            _ => {}
        }
    }
    false
}

/// Whether the text before the parameter list can be a demangled C++ name: no `/` or `;`, and every `:` part
/// of a `::` (JIT names such as `RegExp:(a|b)` or `Ljava/lang/String;hashCode()I` are left alone).
fn cpp_like(head: &str) -> bool {
    if head.contains(['/', ';']) {
        return false;
    }
    let b = head.as_bytes();
    b.iter()
        .enumerate()
        .all(|(i, &c)| c != b':' || b.get(i + 1) == Some(&b':') || (i > 0 && b[i - 1] == b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_names_lose_parameters_and_return_types() {
        for (full, short) in [
            ("Engine::step(int)", "Engine::step"),
            ("runtime.(*mheap).alloc", "runtime.(*mheap).alloc"),
            ("main.(*server).handle.func1", "main.(*server).handle.func1"),
            (
                "double run_kernel<Accumulator<double>, double>(Accumulator<double>&, std::vector<double, std::allocator<double> > const&, int)",
                "run_kernel<Accumulator<double>, double>",
            ),
            (
                "void std::sort<__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > > >(__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, __gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >)",
                "std::sort<__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > > >",
            ),
            (
                "Accumulator<float>::add(std::vector<float, std::allocator<float> > const&, int)",
                "Accumulator<float>::add",
            ),
            (
                "unsigned long long count<int>(int const*, unsigned long)",
                "count<int>",
            ),
            (
                "std::vector<int, std::allocator<int> >::operator[](unsigned long)",
                "std::vector<int, std::allocator<int> >::operator[]",
            ),
            ("operator new(unsigned long)", "operator new"),
            ("operator delete[](void*)", "operator delete[]"),
            ("Foo::operator()(int) const", "Foo::operator()"),
            ("Foo::operator int() const", "Foo::operator int"),
            (
                "std::ostream& operator<< <char>(std::ostream&, Foo const&)",
                "operator<< <char>",
            ),
            (
                "bool operator< <int>(Foo<int> const&, Foo<int> const&)",
                "operator< <int>",
            ),
            ("Foo::operator->() const", "Foo::operator->"),
            (
                "main::{lambda(int)#1}::operator()(int) const",
                "main::{lambda(int)#1}::operator()",
            ),
            (
                "(anonymous namespace)::work(int)",
                "(anonymous namespace)::work",
            ),
            (
                "void (anonymous namespace)::run<int>(int)",
                "(anonymous namespace)::run<int>",
            ),
            ("Engine::reorder()", "Engine::reorder"),
            (
                "Engine::reorder()::{lambda(unsigned int, unsigned int)#1}::operator()(unsigned int, unsigned int) const",
                "Engine::reorder()::{lambda(unsigned int, unsigned int)#1}::operator()",
            ),
        ] {
            assert_eq!(display_name(full), short, "{full}");
        }
        assert_eq!(
            display_name("hot(int) [clone .constprop.0]"),
            "hot [clone .constprop.0]"
        );
    }

    #[test]
    fn long_names_never_print_alike() {
        let names = [
            "v8::internal::compiler::GraphReducer::ReduceTop()",
            "v8::internal::compiler::GraphReducer::Reduce(v8::internal::compiler::Node*)",
            "main",
        ];
        let (width, texts) = fit_column(&names, 36);
        assert_eq!(width, 36);
        assert_eq!(texts[0], "v8::interna…:GraphReducer::ReduceTop");
        assert_eq!(texts[1], "v8::interna…er::GraphReducer::Reduce");
        assert_eq!(texts[2], "main");
        assert!(texts.iter().all(|t| t.chars().count() <= width));
        // Names that differ only in their middle: each keeps the part where it differs, in the same column.
        let a = format!("ns::{}::alpha::{}::run", "x".repeat(30), "y".repeat(30));
        let b = format!("ns::{}::beta::{}::run", "x".repeat(30), "y".repeat(30));
        let (width, texts) = fit_column(&[&a, &b], 36);
        assert_ne!(texts[0], texts[1], "{texts:?}");
        assert!(
            texts[0].contains("alph") && texts[1].contains("bet"),
            "{texts:?}"
        );
        assert!(width == 36 && texts.iter().all(|t| t.chars().count() <= width));
        // A part too long to fit: the column widens until the texts differ.
        let a = format!("{}{}{}", "p".repeat(20), "a".repeat(40), "s".repeat(40));
        let b = format!("{}{}{}", "p".repeat(20), "b".repeat(40), "s".repeat(40));
        let (width, texts) = fit_column(&[&a, &b], 36);
        assert_ne!(texts[0], texts[1], "{texts:?}");
        assert!(width > 36 && texts.iter().all(|t| t.chars().count() <= width));
        // No limit (not a terminal): every name whole.
        let (width, texts) = fit_column_in(&[&a, "main"], 36, None);
        assert_eq!(
            (width, texts[0].as_str(), texts[1].as_str()),
            (100, a.as_str(), "main")
        );
        // Overloads without their parameter lists would be one text: their full names are shown.
        let (_, texts) = fit_column(
            &[
                "Engine::step(int)",
                "Engine::step(double)",
                "Engine::step(int)",
            ],
            20,
        );
        assert_eq!(
            texts,
            [
                "Engine::step(int)",
                "Engine::step(double)",
                "Engine::step(int)"
            ]
        );
        // A name without parameters (an inlined copy's DWARF name) is the function of the full name.
        let (_, texts) = fit_column(&["Engine::reorder()", "Engine::reorder"], 20);
        assert_eq!(texts, ["Engine::reorder", "Engine::reorder"]);
        // The same function twice (two commands, two modules) prints alike.
        let (width, texts) = fit_column(&["main", "main"], 36);
        assert_eq!(
            (width, texts[0].as_str(), texts[1].as_str()),
            (36, "main", "main")
        );
    }

    #[test]
    fn modules_that_differ_in_the_middle_keep_their_difference() {
        let a = "libwide_module_with_a_long_common_prefix_alpha_and_a_long_common_suffix.so";
        let b = "libwide_module_with_a_long_common_prefix_beta_and_a_long_common_suffix.so";
        let (width, texts) = fit_plain(&[a, b, "libc.so.6"], 28, Some(28));
        assert_eq!(width, 28);
        assert!(
            texts[0].contains("alph") && texts[1].contains("bet"),
            "{texts:?}"
        );
        assert!(texts.iter().all(|t| t.chars().count() <= 28), "{texts:?}");
        assert_eq!(texts[2], "libc.so.6");
        // Room for them: whole; no limit: whole.
        assert_eq!(fit_plain(&[a, b], 28, Some(100)).1, [a, b]);
        assert_eq!(
            fit_plain(&[a, b], 28, None),
            (a.len(), vec![a.to_string(), b.to_string()])
        );
    }

    #[test]
    fn other_names_stay() {
        for name in [
            "main",
            "plt_three@plt",
            ".plt",
            "libfoo.so+0x1a20",
            "[unknown]",
            "<stacks_rust::Squares as stacks_rust::Stage>::run",
            "<(i32, u8) as core::fmt::Debug>::fmt",
            "stacks_rust::main::{{closure}}",
            "JS:*hotLoop /app.js:1:17",
            "RegExp:(a|b)",
            "Ljava/lang/String;hashCode()I",
            "_GLOBAL__sub_I_main",
            "",
        ] {
            assert_eq!(display_name(name), name);
        }
    }
}
