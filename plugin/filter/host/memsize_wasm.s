#include "textflag.h"

// func linearMemoryPages() uint32
TEXT ·linearMemoryPages(SB), NOSPLIT, $0-4
	Get SP // I32Store's address operand: the result slot is at SP+ret
	CurrentMemory
	I32Store ret+0(FP)
	RET
