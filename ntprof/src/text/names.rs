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
        ] {
            assert_eq!(display_name(full), short, "{full}");
        }
        assert_eq!(
            display_name("hot(int) [clone .constprop.0]"),
            "hot [clone .constprop.0]"
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
