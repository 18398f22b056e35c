// The device profiles' values (profile_table.cpp), each with its source.
#pragma once

#include <vector>

#include "vk/profile.hpp"

namespace kvrt::vk {

std::vector<DeviceProfile> profile_table();

}  // namespace kvrt::vk
