#include "agent/http/exchange.h"

#include <nlohmann/json.hpp>

namespace cordon::agent::http {

const std::string* RequestHead::header(std::string_view lower_name) const {
  auto it = headers.find(std::string(lower_name));
  return it == headers.end() ? nullptr : &it->second;
}

const std::string* RequestHead::query_param(std::string_view name) const {
  auto it = query.find(std::string(name));
  return it == query.end() ? nullptr : &it->second;
}

Status respond_json_error(Exchange& ex, int status, std::string_view message) {
  nlohmann::json j = {{"code", status}, {"message", std::string(message)}};
  return ex.respond(status, {{"Content-Type", "application/json"}},
                    j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace cordon::agent::http
