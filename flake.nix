{
  # XCE as a Nix flake: the package, `nix run` for the CLI, and a NixOS module with the
  # controller and worker services. It has not been built here (no binary cache is reachable
  # from the development machines); CI only checks that it parses.
  description = "XCE: batch scheduler and cluster manager for on-premises HPC clusters";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-24.05";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in {
      packages = forAll (pkgs: {
        default = pkgs.python311Packages.buildPythonApplication {
          pname = "xce";
          version = "0.1.0";
          pyproject = true;
          src = ./.;
          build-system = [ pkgs.python311Packages.setuptools pkgs.python311Packages.wheel ];
          dependencies = with pkgs.python311Packages; [
            textual typer aiohttp pycapnp pyjwt ldap3 python-pam authlib psutil
          ];
          doCheck = false;
        };
      });

      apps = forAll (pkgs: {
        default = {
          type = "app";
          program = "${self.packages.${pkgs.system}.default}/bin/xce";
        };
      });

      nixosModules.default = { config, lib, pkgs, ... }:
        let
          cfg = config.services.xce;
          xce = self.packages.${pkgs.system}.default;
        in {
          options.services.xce = {
            controller.enable = lib.mkEnableOption "the XCE controller";
            worker.enable = lib.mkEnableOption "the XCE worker";
            configFile = lib.mkOption {
              type = lib.types.path;
              description = "The cluster config (TOML), e.g. written by `xce init`.";
            };
          };
          config = lib.mkMerge [
            (lib.mkIf cfg.controller.enable {
              systemd.services.xce-controller = {
                description = "XCE controller";
                wantedBy = [ "multi-user.target" ];
                after = [ "network-online.target" ];
                serviceConfig = {
                  ExecStart = "${xce}/bin/xce controller --config ${cfg.configFile}";
                  Restart = "on-failure";
                  StateDirectory = "xce";
                  StateDirectoryMode = "0700";
                };
              };
            })
            (lib.mkIf cfg.worker.enable {
              systemd.services.xce-worker = {
                description = "XCE worker";
                wantedBy = [ "multi-user.target" ];
                after = [ "network-online.target" ];
                serviceConfig = {
                  ExecStart = "${xce}/bin/xce worker --config ${cfg.configFile}";
                  Restart = "on-failure";
                  # Jobs run in their own sessions; stopping the worker must not kill them.
                  KillMode = "process";
                };
              };
            })
          ];
        };
    };
}
