// Shared declarations of every kvrt kernel.
#ifndef KVRT_COMMON_GLSL
#define KVRT_COMMON_GLSL

// The workgroup size is a specialization constant (id 0), so one SPIR-V
// serves devices with different preferred sizes.
layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

// Invocations of the whole dispatch, for grid-stride loops: a kernel launched
// with fewer workgroups than elements walks the range in steps of this size.
uint kvrt_grid_stride() { return gl_NumWorkGroups.x * gl_WorkGroupSize.x; }

#endif
