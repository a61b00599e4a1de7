#include "textflag.h"

// func linearMemoryPages() uint32
TEXT ·linearMemoryPages(SB), NOSPLIT, $0-4
	CurrentMemory
	I32Store ret+0(FP)
	RET
