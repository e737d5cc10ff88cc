"""PTX texts that several front-end tests read."""

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"

COPY = HEAD + """
// a comment, and a block comment: /* ignored */
.visible .entry copy(
	.param .u64 .ptr .global .align 16 copy_param_0,
	.param .u64 copy_param_1,
	.param .u32 copy_param_2
)
.maxntid 64, 1, 1
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
	.reg .f32 	%f<2>;
	.reg .b64 	%rd<6>;
	ld.param.u64 	%rd1, [copy_param_0];
	ld.param.u64 	%rd2, [copy_param_1];
	ld.param.u32 	%r1, [copy_param_2];
	mov.u32 	%r2, %tid.x;
	setp.ge.u32 	%p1, %r2, %r1;
	@%p1 bra 	$L__done;
	mul.wide.u32 	%rd3, %r2, 4;
	add.s64 	%rd4, %rd1, %rd3;
	ld.global.f32 	%f1, [%rd4];
	add.s64 	%rd5, %rd2, %rd3;
	st.global.f32 	[%rd5+0], %f1;
$L__done:
	ret;
}
"""
