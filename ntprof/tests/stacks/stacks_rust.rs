//! stacks_rust [CPU_SECONDS]: a Rust program for the call-stack tests: generic code, trait objects and closures,
//! whose stacks must come out demangled (`stacks_rust::Mixer<u64>::mix`, `<stacks_rust::Squares as
//! stacks_rust::Stage>::run`, ...). Built by the tests with rustc -O and frame pointers.
//!
//! main -> Pipeline::run -> Stage::run (two implementations, 2 : 1 of the work) -> Mixer<T>::mix (generic leaf)

use std::hint::black_box;
use std::time::Instant;

pub struct Mixer<T> {
    state: T,
}

impl<T: Copy + std::ops::BitXor<Output = T> + Into<u64> + From<u32>> Mixer<T> {
    #[inline(never)]
    pub fn mix(&mut self, rounds: u64) -> u64 {
        let mut x: u64 = self.state.into();
        for i in 0..rounds {
            x = (x ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            x = x.rotate_left(23);
        }
        self.state = self.state ^ T::from(x as u32);
        x
    }
}

pub trait Stage {
    fn run(&mut self, rounds: u64) -> u64;
}

pub struct Squares {
    mixer: Mixer<u64>,
}

pub struct Cubes {
    mixer: Mixer<u64>,
}

impl Stage for Squares {
    #[inline(never)]
    fn run(&mut self, rounds: u64) -> u64 {
        self.mixer.mix(2 * rounds).wrapping_add(1)
    }
}

impl Stage for Cubes {
    #[inline(never)]
    fn run(&mut self, rounds: u64) -> u64 {
        self.mixer.mix(rounds).wrapping_add(3)
    }
}

pub struct Pipeline {
    stages: Vec<Box<dyn Stage>>,
}

impl Pipeline {
    #[inline(never)]
    pub fn run(&mut self, rounds: u64) -> u64 {
        self.stages
            .iter_mut()
            .map(|s| black_box(s.run(rounds)))
            .fold(0, u64::wrapping_add)
    }
}

fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let mut p = Pipeline {
        stages: vec![
            Box::new(Squares { mixer: Mixer { state: 1 } }),
            Box::new(Cubes { mixer: Mixer { state: 2 } }),
        ],
    };
    let start = Instant::now();
    let mut sum = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        sum = sum.wrapping_add(p.run(black_box(1 << 16)));
    }
    eprintln!("stacks_rust: done ({sum:x})");
}
