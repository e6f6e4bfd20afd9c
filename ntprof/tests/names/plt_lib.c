/* Two tiny functions a program calls through its PLT (tests/names.rs). They are exported with default
 * visibility, so every call from another object goes through a PLT stub; each does almost nothing (the
 * caller makes each call wait in its stub: plt_main.c). */
int plt_three(int x) { return x + 3; }
int plt_one(int x) { return x ^ 1; }
