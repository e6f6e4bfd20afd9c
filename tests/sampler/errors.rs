//! Bad input and missing privilege.

use super::*;
