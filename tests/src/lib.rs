//! Integration tests of dropscope against the real kernel; see tests/.
