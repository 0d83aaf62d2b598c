int wt_shim_placeholder(void) { return 0; }
