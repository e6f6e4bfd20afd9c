//! Call chains and user-stack copies.

use super::*;
