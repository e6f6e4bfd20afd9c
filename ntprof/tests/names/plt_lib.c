/* Two tiny functions a program calls through its PLT (tests/names.rs). They are exported with default
 * visibility, so every call from another object goes through a PLT stub; each does almost nothing, so the
 * stub's jump is a good part of the time. */
int plt_three(int x) { return x + 3; }
int plt_one(int x) { return x ^ 1; }
