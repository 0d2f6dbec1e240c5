void lockstep_test_empty_preload(void) {}
